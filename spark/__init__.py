"""kairosmq.spark: the delivery-quality batch job over the broker's JSON logs (PySpark).

schema (the explicit StructType, from protocol/events.py's catalogue), transforms (pure
DataFrame -> DataFrame metrics), svg + report (HTML/console rendering), job (main/E-T-L).
"""
