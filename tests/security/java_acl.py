"""RocketMQ 4.9.8's own ACL code (its jars, run by ``java``) as an oracle for the tests.

Owns: ``java_signatures(cases)``: each case (access key, secret key, request code, body,
extFields) signed by ``org.apache.rocketmq.acl.common.AclClientRPCHook`` in one JVM run;
``java_missing()`` names what is missing (no ``java`` or no jars) so callers can skip.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path

from tests.helpers import ROCKETMQ_HOME

LIB = ROCKETMQ_HOME / "lib"
GOLDEN_JAVA = """
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.Base64;

public class Golden {
    // each input line: accessKey \\t secretKey \\t code \\t body(base64) {\\t key \\t value}
    // (every item base64 of its UTF-8 bytes); prints one Signature per line
    static String d(String s) {
        return new String(Base64.getDecoder().decode(s), StandardCharsets.UTF_8);
    }
    public static void main(String[] args) throws Exception {
        for (String line : Files.readAllLines(Paths.get(args[0]))) {
            String[] a = line.split("\\t", -1);
            int code = Integer.parseInt(a[2]);
            RemotingCommand cmd = RemotingCommand.createRequestCommand(code, null);
            for (int i = 4; i + 1 < a.length; i += 2) cmd.addExtField(d(a[i]), d(a[i + 1]));
            if (!a[3].isEmpty()) cmd.setBody(Base64.getDecoder().decode(a[3]));
            new AclClientRPCHook(new SessionCredentials(d(a[0]), d(a[1])))
                .doBeforeRequest("127.0.0.1:1", cmd);
            System.out.println(cmd.getExtFields().get("Signature"));
        }
    }
}
"""

Case = tuple[str, str, int, bytes, dict[str, str]]


def java_missing() -> str | None:
    if shutil.which("java") is None:
        return "java is not on PATH"
    if not any(LIB.glob("rocketmq-server-*.jar")):
        return f"RocketMQ 4.9.8 jars not found in {LIB}"
    return None


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def java_signatures(cases: list[Case], work: Path) -> list[str]:
    src = work / "Golden.java"
    src.write_text(GOLDEN_JAVA)
    lines = []
    for ak, sk, code, body, ext in cases:
        items = [_b64(ak), _b64(sk), str(code), base64.b64encode(body).decode()]
        for k, v in ext.items():
            items += [_b64(k), _b64(v)]
        lines.append("\t".join(items))
    inp = work / "cases.txt"
    inp.write_text("\n".join(lines) + "\n")
    out = subprocess.run(
        ["java", "-Xmx128m", "-XX:+UseSerialGC", "-cp", f"{LIB}/*", str(src), str(inp)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return out.stdout.split()
