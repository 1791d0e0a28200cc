"""The execution-flow graph, one view unit: ``live`` (its panel, the selection fields it reads, its callbacks: Dash) and
``static`` (the snapshot's render and the rules it shares with the live view: no Dash)."""
