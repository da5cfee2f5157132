"""``sapiens2-ft serve``: fine-tuned models as an HTTP service on LitServe (the ``serve`` extra; docs/deploy.md).
``cli`` (arguments, models prepared once), ``requests`` (one request read and checked: the image through the boundary,
the options, the limits; no LitServe), ``models`` (a worker's models, run as ``predict`` runs them), ``server`` (the
LitAPI, the gate in front of it, the LitServer)."""
