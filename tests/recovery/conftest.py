"""Spot recovery's tests, the watchdog's side and the laptop's together (functions/recovery/,
client/pods/recovery/, and the pod's boot and resume: instance_side/boot.py, resume.py). The recovering run's
worlds are tests/fakes/recovery.py's (over testkit/spot_world.py), the watchdog's store fakes
tests/fakes/watchdog.py's."""
