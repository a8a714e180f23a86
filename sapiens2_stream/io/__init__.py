"""Sources, sinks and drawing."""
