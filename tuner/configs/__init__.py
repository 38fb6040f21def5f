"""From a proposed config to a concrete launch: feasibility rules, the checkpoint, the argv (host or
container) and the dry-run plan of a whole space."""
