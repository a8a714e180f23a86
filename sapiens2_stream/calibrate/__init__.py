"""`sapiens2-stream calibrate`: cameras calibrated without another tool, written as Pose2Sim's Calib.toml."""
