#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""check_layers.py fails on each kind of violation: a copy of the real src/ and pipeline/ passes,
then one injected edge at a time (an upward include, a peer include, a folder without a layer, an
include that resolves nowhere) must make it exit 1 and name the offending file and line."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else os.path.join(HERE, "..", "..")
CHECK = os.path.join(HERE, "check_layers.py")


def run(root):
    p = subprocess.run([sys.executable, "-B", CHECK, "--root", root],
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


class CheckLayersTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="check_layers_")
        for top in ("src", "pipeline"):
            shutil.copytree(os.path.join(ROOT, top), os.path.join(self.tmp, top),
                            ignore=shutil.ignore_patterns("*.py", "*.md", "meson.build"))

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def inject(self, rel, line):
        path = os.path.join(self.tmp, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
        with open(path, encoding="utf-8") as fh:
            return sum(1 for _ in fh)

    def assert_fails(self, *expected):
        rc, out = run(self.tmp)
        self.assertEqual(rc, 1, out)
        for e in expected:
            self.assertIn(e, out)

    def test_tree_as_committed_passes(self):
        rc, out = run(self.tmp)
        self.assertEqual(rc, 0, out)
        self.assertIn("all downward", out)

    def test_metrics_including_the_control_plane_fails(self):
        n = self.inject("src/metrics/stats.h", '#include "control/control_plane.h"')
        self.assert_fails(f"src/metrics/stats.h:{n}:", "src/control (layer 8)", "a higher layer")

    def test_packet_path_including_the_schema_fails(self):
        n = self.inject("pipeline/context.h", '#include "config/config.h"')
        self.assert_fails(f"pipeline/context.h:{n}:", "src/config/config.h", "a higher layer")

    def test_peer_include_fails(self):
        n = self.inject("src/compile/snapshot_build.cc", '#include "runtime/dataplane.h"')
        self.assert_fails(f"src/compile/snapshot_build.cc:{n}:", "a peer, src/runtime")

    def test_folder_without_a_layer_fails(self):
        self.inject("src/roce_v3/stage.cc", '#include "dataplane/snapshot.h"')
        self.assert_fails("folder src/roce_v3/ has no layer")

    def test_feature_pieces_follow_the_layer_order(self):
        self.inject("src/features/roce/view.h", '#include "dataplane/counters.h"')
        self.inject("src/features/roce/config.h", '#include "net/addr.h"')
        self.inject("src/features/roce/compile.cc",
                    '#include "features/roce/config.h"\n#include "features/roce/view.h"')
        self.inject("src/features/roce/datapath.cc",
                    '#include "features/roce/view.h"\n#include "pipeline/context.h"')
        self.inject("src/app/features.cc", '#include "features/roce/compile.cc"')
        rc, out = run(self.tmp)
        self.assertEqual(rc, 0, out)
        # The datapath of a feature must not read its own schema section.
        n = self.inject("src/features/roce/datapath.cc", '#include "features/roce/config.h"')
        self.assert_fails(f"src/features/roce/datapath.cc:{n}:", "a higher layer")

    def test_feature_including_another_feature_fails(self):
        self.inject("src/features/ina/view.h", '#include "dataplane/counters.h"')
        n = self.inject("src/features/roce/datapath.cc", '#include "features/ina/view.h"')
        self.assert_fails(f"src/features/roce/datapath.cc:{n}:", "another feature's piece")

    def test_shared_layer_including_a_feature_fails(self):
        self.inject("src/features/roce/view.h", '#include "dataplane/counters.h"')
        n = self.inject("pipeline/pipeline.cc", '#include "features/roce/view.h"')
        self.assert_fails(f"pipeline/pipeline.cc:{n}:", "only src/app (the one registration)")

    def test_feature_file_without_a_piece_name_fails(self):
        self.inject("src/features/roce/helpers.h", '#include "net/addr.h"')
        self.assert_fails("src/features/roce/helpers.h: a feature file is")

    def test_include_outside_the_tree_fails(self):
        n = self.inject("src/net/addr.cc", '#include "net/no_such_header.h"')
        self.assert_fails(f"src/net/addr.cc:{n}:", "is not in the tree")


if __name__ == "__main__":
    unittest.main(verbosity=2)
