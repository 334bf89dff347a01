"""Debate tools: tournaments, the judge curve of a training run, offline re-judging, the experts' winning
transcripts and best-of-N preference pairs (`playpen debate TOOL`), over recorded episodes of the debate games
(`recorded_episodes`). The games themselves (debate, consultancy,
double consultancy, the advocacy protocol, best-of-N advocates) live in playpen.games; these tools sit above train
and eval, whose models and players they use."""
