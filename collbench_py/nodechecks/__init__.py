"""The node checks as the controller reads them: hosts/<host>/node/ of a run directory (checks.json
and the raw outputs beside it) into records, and the measurements per component they hold."""
