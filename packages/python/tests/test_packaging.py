"""The package is ready for PyPI: pyproject.toml describes it and points at what is here."""

from __future__ import annotations

import os
import tomllib
import unittest

import botpay

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Packaging(unittest.TestCase):
    def test_pyproject(self) -> None:
        with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
            project = tomllib.load(f)
        meta = project["project"]
        self.assertEqual(meta["version"], botpay.__version__)
        self.assertEqual(meta["dependencies"], [])
        self.assertTrue(os.path.exists(os.path.join(ROOT, meta["readme"])))
        self.assertEqual(project["build-system"]["build-backend"], "setuptools.build_meta")
        self.assertEqual(project["tool"]["setuptools"]["packages"]["find"]["where"], ["src"])
        self.assertTrue(os.path.exists(os.path.join(ROOT, "src", "botpay", "py.typed")))

    def test_standard_library_only(self) -> None:
        import ast
        import sys

        allowed = set(sys.stdlib_module_names) | {"botpay", "__future__"}
        for name in os.listdir(os.path.join(ROOT, "src", "botpay")):
            if not name.endswith(".py"):
                continue
            with open(os.path.join(ROOT, "src", "botpay", name), encoding="utf-8") as f:
                tree = ast.parse(f.read())
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    modules = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    modules = [node.module or ""]
                else:
                    continue
                for module in modules:
                    self.assertIn(module.split(".")[0], allowed, f"{name} imports {module}")
