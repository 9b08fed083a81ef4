"""The compiled parts of the package (everything else is in pyproject.toml): the pull-body
decoder, rocketmq_spark/sidecar/_fastcolumnar.c (columnar.py's numpy decoder is the
reference and the fallback), and a range's plain pulls in one call,
rocketmq_spark/client/_fastpull.c (sidecar/pull.py's loop is the reference and the
fallback). Both are optional: where they cannot be built, the Python paths run."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("rocketmq_spark.sidecar._fastcolumnar",
                             ["rocketmq_spark/sidecar/_fastcolumnar.c"], extra_compile_args=["-O2"], optional=True),
                   Extension("rocketmq_spark.client._fastpull",
                             ["rocketmq_spark/client/_fastpull.c"], extra_compile_args=["-O2"], optional=True)])
