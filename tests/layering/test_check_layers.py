#!/usr/bin/env python3
"""The layering check (scripts/check_layers.py) on small fixture trees: it passes a clean tree and fails, naming
the file, the line and both layers, on each kind of bad include."""
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "check_layers.py")

TABLE = """# Fixture

```layers
0  engine/low
1  engine/high
2  views     | engine: engine/high
3  app
```
"""


def make_tree(root, files, table=TABLE):
    with open(os.path.join(root, "ARCHITECTURE.md"), "w") as f:
        f.write(table)
    for path, text in files.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(text)


def run(root):
    p = subprocess.run([sys.executable, SCRIPT, "--root", root], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


CLEAN = {
    "engine/low/a.h": "#pragma once\n#include <vector>\n",
    "engine/low/a.cpp": '#include "engine/low/a.h"\n#include "a_impl.inc"\n',
    "engine/low/a_impl.inc": "// included beside\n",
    "engine/high/b.h": '#pragma once\n#include "engine/low/a.h"\n',
    "views/panel.cpp": '#include "engine/high/b.h"\n#include "panel.moc"\n#include <QWidget>\n',
    "app/main.cpp": '#include "views/panel.h"\n#include "engine/low/a.h"\n',
    "views/panel.h": "#pragma once\n",
}


class CheckLayersTest(unittest.TestCase):
    def check(self, files, table=TABLE):
        with tempfile.TemporaryDirectory() as root:
            make_tree(root, files, table)
            return run(root)

    def test_clean_tree_passes(self):
        rc, out = self.check(CLEAN)
        self.assertEqual(rc, 0, out)
        self.assertEqual(out, "")

    def test_include_of_a_higher_layer_fails(self):
        files = dict(CLEAN)
        files["engine/low/a.cpp"] = '#include "engine/low/a.h"\n\n#include "engine/high/b.h"\n'
        rc, out = self.check(files)
        self.assertEqual(rc, 1, out)
        self.assertIn("engine/low/a.cpp:3: includes engine/high/b.h (layer 1, engine/high) from layer 0 "
                      "(engine/low)", out)
        self.assertIn("check_layers: 1 include(s) break the layers", out)  # exactly one violation

    def test_restricted_root_fails_outside_the_allowed_folders(self):
        files = dict(CLEAN)
        files["views/panel.cpp"] = '#include "engine/low/a.h"\n'
        rc, out = self.check(files)
        self.assertEqual(rc, 1, out)
        self.assertIn("views/panel.cpp:1: includes engine/low/a.h: views reaches engine only through engine/high",
                      out)

    def test_engine_including_qt_fails(self):
        files = dict(CLEAN)
        files["engine/high/b.h"] = "#pragma once\n#include <QString>\n"
        rc, out = self.check(files)
        self.assertEqual(rc, 1, out)
        self.assertIn("engine/high/b.h:2: includes <QString>: the engine uses no Qt or ImGui", out)

    def test_folder_without_a_layer_fails(self):
        files = dict(CLEAN)
        files["engine/new/c.h"] = "#pragma once\n"
        rc, out = self.check(files)
        self.assertEqual(rc, 1, out)
        self.assertIn("engine/new/c.h: its folder has no layer", out)

    def test_missing_table_is_an_error(self):
        rc, out = self.check(CLEAN, table="# no table here\n")
        self.assertEqual(rc, 2, out)
        self.assertIn("no ```layers block", out)

    def test_malformed_table_line_names_its_line(self):
        rc, out = self.check(CLEAN, table="text\n```layers\n0 engine/low\nlow engine/high\n```\n")
        self.assertEqual(rc, 2, out)
        self.assertIn("ARCHITECTURE.md:4: expected 'LAYER PATH", out)


if __name__ == "__main__":
    unittest.main()
