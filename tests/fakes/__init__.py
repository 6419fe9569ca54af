"""The tests' fakes, stubs and worlds, one module per family, imported from every test folder as
`from fakes.<family> import ...` (tests/ is on the path: pytest puts the root conftest's folder there, and
`make typecheck` gives it to mypy). The fakes the product's own drill, demo and rehearsal run too are
gpuc.testkit's (testkit/fakes.py, testkit/podfakes.py, testkit/spot_world.py, ...); these build on them."""
