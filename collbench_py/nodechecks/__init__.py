"""The node phase's decisions made on the controller (which HCAs a node's loopbacks test)."""
