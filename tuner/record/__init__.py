"""The trial record: the user-attr schema every reader shares, the answers read out of a study
(best config, groups of repeats, gains), SLO arithmetic, and where studies are stored."""
