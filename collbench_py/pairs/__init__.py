"""Host pairs: the round-robin schedule, the adaptive planner, and the controller that runs a round."""
