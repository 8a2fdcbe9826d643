"""`corral simulate`: replay a scenario or a trace through the core on a virtual clock."""
