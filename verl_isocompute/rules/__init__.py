"""The rules verl-facing code applies, as plain functions: what a step trains on, the LR rule, the reward.

Layer: pure rules (no verl, Ray, torch or hydra: the standard library, numpy and pandas).

``lr`` (the sqrt batch-size LR rule and its warm-up), ``masks`` (which rollouts each loss term sees),
``metrics`` (unbiased avg@k / best@k / worst@k, pass-rate histogram), ``reward`` (the math-verify reward
verl calls, with a real time bound), ``answers`` and ``format_metrics`` (literal grading; format vs skill),
``names`` (every name we register into verl), ``progress`` (phase markers), ``weight_version`` (rollouts of
the current policy only). The verl code that applies them is in ``training/``; each is tested alone.
"""
