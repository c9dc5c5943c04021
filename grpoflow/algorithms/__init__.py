"""The RL algorithms, one folder each. A folder is everything an algorithm is:

- ``__init__.py``: its torch-free spec, ``ENTRY`` (:class:`grpoflow.algorithms.entry.Entry`): its
  name and title, its KL key, its curves, its smoke-sized settings, whether its stage needs the
  accelerator, and whether a default run trains it (``opt_in``);
- ``config.py`` (no torch either): its params section (``SECTION``, the params key named after it),
  the space ``make tune`` searches (``SPACE``, ``tune.<name>``) and its cross-field rules (``RULES``);
- ``update.py``: its update, ``update(batch, learner) -> metrics``, written against the learner's
  public contract (:mod:`grpoflow.rl.learner`), and its registration (``ALGORITHM``).

:mod:`grpoflow.catalog` finds every folder here; the params schema, the tune section, the smoke
settings, the GPU stages, the stages in dvc.yaml, the ablation's arms and the comparison are
assembled from the specs. docs/architecture.md ("Adding an algorithm") walks through a new one.
"""
