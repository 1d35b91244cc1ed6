"""`torchtalk audit`: measured safety of the selection (mutate, build, run, compare)."""
