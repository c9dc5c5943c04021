"""A temporary catalog line for tests/unit/test_catalog.py: the toy REINFORCE of
tests/unit/toy_reinforce.py, joined through ``GRPOFLOW_ALGORITHMS=tests.unit.toy_catalog:ENTRY`` or
:func:`grpoflow.catalog.extended`. As light as the catalog: it imports no torch."""

from grpoflow.catalog import Entry

ENTRY = Entry(name="reinforce", title="REINFORCE", module="tests.unit.toy_reinforce", curves=("reward_mean",))
