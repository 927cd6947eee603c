"""Keeping a finished run current: documents join it (``update``), leave it (``forget``), and its memory's
predictions are traced back to them (``explain``), all without rebuilding the run.

One concept a module, imported in one direction:
  - ``config``: :class:`MaintenanceConfig` (the ``update``, ``forget`` and ``explain`` settings);
  - ``documents``: document ids (a hash of the text), new documents from a file, what the run holds;
  - ``ledger``: the run's maintenance manifest (its documents, every operation: what, when, counts);
  - ``transaction``: staging an operation and committing it by renames (a kill leaves the previous run);
  - ``shards``: datastore and teacher shards as an operation keeps, drops, rewrites or adds them;
  - ``targets``: sparse targets (kNN rows, the backbone's distribution, the mixed label);
  - ``finetune``: the rows an operation trains on, a widened corpus head, the project's training loop;
  - ``operation``: what ``update`` and ``forget`` share (the run as found, recomputed teacher shards, commit);
  - ``update``, ``forget``, ``explain`` (and ``explain_html``, its page): the three commands.
"""
