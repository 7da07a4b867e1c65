"""collbench: benchmark GPU collectives across a cluster and judge the numbers."""

__version__ = "0.1.0"
