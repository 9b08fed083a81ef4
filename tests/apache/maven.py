"""Classpaths of Apache artifacts, resolved with Maven from Maven Central and cached.

``classpath(["org.apache.rocketmq:rocketmq-broker:5.5.0", ...])`` writes a one-off pom
naming the artifacts under the cache directory, asks Maven for its runtime classpath
(``dependency:build-classpath``) and keeps the answer beside the pom. A second call with
the same artifacts reads the kept answer without starting Maven, as long as every jar it
names is still in the local repository, so a second start downloads nothing and costs no
Maven start-up. Maven's own ``~/.m2`` holds the jars.

The cache directory is ``$ROCKETMQ_SPARK_MAVEN_CACHE`` or ``~/.cache/rocketmq-spark/maven``.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Sequence
from xml.sax.saxutils import escape

RESOLVE_TIMEOUT = 900.0   # seconds: a first resolution downloads some 100 MB


class MavenError(RuntimeError):
    """Maven is missing, or could not resolve the artifacts (the message says which)."""


def cache_dir() -> Path:
    return Path(os.environ.get("ROCKETMQ_SPARK_MAVEN_CACHE")
                or Path.home() / ".cache" / "rocketmq-spark" / "maven")


def _pom(artifacts: Sequence[str]) -> str:
    deps = []
    for coordinate in artifacts:
        parts = coordinate.split(":")
        if len(parts) != 3 or not all(parts):
            raise ValueError(f"artifact {coordinate!r} is not group:artifact:version")
        group, artifact, version = (escape(p) for p in parts)
        deps.append(f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
                    f"<version>{version}</version></dependency>")
    return ("<project xmlns=\"http://maven.apache.org/POM/4.0.0\"><modelVersion>4.0.0</modelVersion>"
            "<groupId>rocketmq-spark.local</groupId><artifactId>classpath</artifactId><version>0</version>"
            f"<dependencies>{''.join(deps)}</dependencies></project>\n")


_MISSING = re.compile(r"(?:Could not find artifact |Missing artifact )(\S+)|(\S+:\S+:\S+) was not found in")


def _missing_artifacts(output: str) -> list[str]:
    """The coordinates Maven says it could not find, from its error output."""
    return sorted({a or b for a, b in _MISSING.findall(output)})


def classpath(artifacts: Sequence[str], *, timeout: float = RESOLVE_TIMEOUT) -> str:
    """The runtime classpath (``:``-joined jars) of ``artifacts`` and their dependencies."""
    pom = _pom(sorted(artifacts))
    where = cache_dir() / hashlib.sha256(pom.encode()).hexdigest()[:16]
    kept = where / "classpath.txt"
    if kept.exists():
        jars = kept.read_text().strip()
        if jars and all(Path(j).exists() for j in jars.split(os.pathsep)):
            return jars
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenError("Maven (mvn) is not on the PATH: it resolves the Apache RocketMQ artifacts "
                         "(install it, e.g. apt-get install maven)")
    where.mkdir(parents=True, exist_ok=True)
    (where / "pom.xml").write_text(pom)
    scratch = where / "classpath.txt.new"
    try:
        done = subprocess.run([mvn, "-B", "-q", "dependency:build-classpath", f"-Dmdep.outputFile={scratch}"],
                              cwd=where, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise MavenError(f"Maven did not resolve {', '.join(artifacts)} in {timeout:.0f} s") from None
    if done.returncode != 0 or not scratch.exists():
        output = done.stdout + done.stderr
        missing = _missing_artifacts(output)
        why = (f"not served by the Maven repository: {', '.join(missing)}" if missing
               else "\n".join(output.strip().splitlines()[-15:]))
        raise MavenError(f"Maven could not resolve {', '.join(artifacts)}: {why}")
    scratch.replace(kept)
    return kept.read_text().strip()
