"""Experiments: declarative sweeps over the model and the emulated backend, and the figures.

Public API:

``spec``     ``load_spec(file) -> ExperimentSpec`` (figure kind, title, caption, sweeps),
             ``Sweep.points()`` (the cross product), ``resolve(sweep, values, device)`` (the
             complete configuration of one point), ``config_hash(config)``; every error is a
             ``SpecError`` naming the file, the key, the value and what is allowed.
``sweep``    ``run_spec(spec, results_dir, only=, fresh=, pool=, progress=, csv=, out=)``
             computes what is not stored yet and writes the tables; ``Pool`` (spawn-safe
             worker processes, shared by several specs).
``store``    where tables live (``<results>/<name>.parquet``, GPU-measured rows in
             ``<results>/gpu/``), ``load_results(results_dir, name)``.
``figures``  ``FIGURES``: kind -> function(table) -> matplotlib Figure.
``render``   ``regenerate(spec_dir, results_dir, out_dir)``: every figure, PNG and PDF.

The commands are ``gpuwrite sweep FILE`` and ``gpuwrite figures``; experiments/README.md
lists the figures.
"""
