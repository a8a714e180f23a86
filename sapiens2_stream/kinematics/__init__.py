"""OpenSim scaling and inverse kinematics of the people a run put in metres (`sapiens2-stream kinematics`)."""
