"""Debate tools: tournaments, the iterative-DPO judge curve, offline re-judging and the experts' winning
transcripts (`playpen debate TOOL`). The games themselves (debate, consultancy, the advocacy protocol) live in
playpen.games; these tools sit above train and eval, whose models and players they use."""
