"""Live cameras over a fleet of Ray workers: one long-lived worker per GPU runs the same multi-source pipeline as
`run` for the cameras placed on it; the driver places cameras by measured cost, moves the cameras of a lost
machine, fences writers by epoch and serves one health endpoint for the whole fleet."""
