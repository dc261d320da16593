# SPDX-License-Identifier: Apache-2.0
"""e2e-allreduce-overrun: workers that exceed the window the switch was told (issue 9, defect 5).

The testbed and checks of e2e-allreduce-fallback, but the switch's job declares worker_window 4
(its own window) while the workers keep 16 chunks in flight over lossy links. Their contributions
claim results they do not hold yet; the switch counts these window violations, measures release
proofs in a wider window, and every worker still gets every exact result: one misbehaving window
slows the job, it does not stop it.
"""

import os

os.environ.setdefault("INAE2E_FALLBACK_DECLARED_WINDOW", "4")

from test_allreduce_fallback import test  # noqa: E402
from testbed import main  # noqa: E402

if __name__ == "__main__":
    main(test)
