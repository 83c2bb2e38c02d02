"""The scenarios ``gpu-loadtest`` runs: the closed-loop demo and its settings, a run against a real endpoint, and
the comparisons of several demo runs."""
