"""Generated protobuf/gRPC code of the sidecar API v1 (``scripts/gen_proto``; never edit)."""
