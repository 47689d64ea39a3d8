"""Master/slave replication: RocketMQ 4.x's HA protocol (docs/replication.md).

Rooms: ``role.py`` (BrokerRole and what each role may do), ``wire.py`` (the frame formats,
sans-IO), ``master.py`` (HAService/HAConnection: the master's HA listener, what each
slave acked, SYNC_MASTER's waits and the confirm offset), ``slave.py`` (HAClient: the
slave's connection, its reports and the appends), ``sync.py`` (SlaveSynchronize: the
tables that are not in the commit log), ``epoch.py`` (the epochs a promotion starts) and
``rejoin.py`` (a starting slave's log cut back to its master's newest epoch). The store's
half of a slave is ``store/replica.py`` (replicated bytes appended and dispatched with
recovery's code).
"""
