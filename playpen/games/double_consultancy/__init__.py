"""double_consultancy: two consultants, one per answer, each questioned apart; the judge reads both sessions
(see ../debate/README.md)."""
