"""Learned rewards: scorers (sequence classifiers and callable labellers), preference pairs for reward-model
training, prompt files, and `playpen meter`.

    scorers           resolve + check a classifier or callable scorer (cheap, before anything is written),
                      then load it
    labellers         offline callable scorers from PyPI (vaderSentiment), usable as labels and as meters
    preference_pairs  chosen/rejected jsonl, labelled texts, episodes of the same instance in records
    prompts           the prompts jsonl of `playpen meter` and of GRPO on prompts
    meter             `playpen meter MODEL --classifier C --prompts FILE`

The reward-model recipe itself is `playpen.train.reward`; RL against a learned reward is GRPO with
`reward_model:` (`playpen.train.learned_reward`). This package stays light at import: torch and transformers
load inside the functions that need them.
"""
