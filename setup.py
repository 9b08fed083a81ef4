"""The compiled part of the package (everything else is in pyproject.toml): the pull-body
decoder, rocketmq_spark/sidecar/_fastcolumnar.c. columnar.py's numpy decoder is the
reference and the fallback when it is not built."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("rocketmq_spark.sidecar._fastcolumnar",
                             ["rocketmq_spark/sidecar/_fastcolumnar.c"], extra_compile_args=["-O2"])])
