# UPerNet-SoLA-T-GDN (every WKV layer replaced by bidirectional Gated DeltaNet)
# on the toy ADE20K, with the schedule of upernet_sola-t_toy-ade.py, so
# tools/demo.py compares the two at equal iterations.
_base_ = ['./upernet_sola-t_toy-ade.py']

model = dict(backbone=dict(arch='t-gdn'))
