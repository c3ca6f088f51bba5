# SoLA-B UPerNet ADE20K with the Hidden State Bridge on: Supplement
# Table 8's HSB row. upernet_sola-b_ade20k.py is the main-table row (no HSB).
_base_ = ['./upernet_sola-b_ade20k.py']

model = dict(backbone=dict(with_hsb=True))
