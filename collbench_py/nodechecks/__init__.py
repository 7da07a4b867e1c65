"""The node checks on the controller: which HCAs a node's loopbacks test (hcas.py, decided before the
phase), and hosts/<host>/node/ of a run directory (checks.json and the raw outputs beside it) read
into records and the measurements per component they hold (nodedir.py)."""
