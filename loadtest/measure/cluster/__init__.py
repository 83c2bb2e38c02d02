"""A live cluster's own records of its scale-ups, read back into the demo's time-to-capacity figures
(``gpu-loadtest capacity``): :mod:`.objects` (API objects -> records) and :mod:`.messages` (the controllers' event
messages) are pure, as are :mod:`.replicas` (each new replica's phases), :mod:`.scale_ups` (the HPA's decisions ->
scale-ups) and :mod:`.rows` (the per-second timeline); :mod:`.reader` reads a cluster with the official client and
:mod:`.journal` keeps what ``--watch`` saw."""
