"""Stand-in for the torch layer, used only so `cdk synth` works before `make layer`.

A stack synthesized with this layer deploys functions WITHOUT torch. Build the real layer with
`make layer` (layers/torch/build.py writes layers/torch/dist).
"""

TORCH_LAYER_STUB = True
