"""The committed gRPC/protobuf code is what scripts/gen_proto makes of proto/ today."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ("sidecar_pb2.py", "sidecar_pb2.pyi", "sidecar_pb2_grpc.py")
REL = Path("rocketmq_spark/sidecar/v1")


def test_generated_code_is_up_to_date(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHON=sys.executable)
    subprocess.run(["bash", str(ROOT / "scripts" / "gen_proto"), str(tmp_path)], check=True,
                   env=env, capture_output=True, timeout=120)
    stale = [name for name in GENERATED
             if (tmp_path / REL / name).read_bytes() != (ROOT / REL / name).read_bytes()]
    assert not stale, f"stale generated code {stale}: run scripts/gen_proto and commit the result"


def test_generated_code_imports_as_a_package() -> None:
    from rocketmq_spark.sidecar.v1 import sidecar_pb2, sidecar_pb2_grpc

    assert sidecar_pb2.DESCRIPTOR.package == "rocketmq_spark.sidecar.v1"
    names = set(sidecar_pb2.DESCRIPTOR.services_by_name["Sidecar"].methods_by_name)
    assert names == {"Health", "GetQueues", "GetOffsets", "SearchOffsets", "QueryMessages", "Lock", "Unlock",
                     "RegisterConsumer", "UnregisterConsumer", "Pull", "CommitOffsets", "Send", "SendBack", "CommitTransaction", "AbortTransaction"}
    assert hasattr(sidecar_pb2_grpc, "SidecarStub")
