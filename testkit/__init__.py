"""gpuc.testkit: the scaffolding around the product, never part of what a pod renter installs.

The RunPod and Vast emulators, the emulated platform (containers over a loopback sshd), the sshd
itself, the NVML stand-in, the fault hooks of the local sandbox, the one set of fakes the tests and
`gpuc drill` share, and the drill's scenarios. `gpuc demo` and `gpuc drill` run from a clone of the
repository, where this package sits beside the product; the wheel (`pip install gpuc`) leaves it out.
"""

from __future__ import annotations
