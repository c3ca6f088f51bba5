"""Result files of the benchmark and study scripts under ``tools/`` and ``projects/``."""
import csv
import os


def write_csv(rows, path, fields=None):
    """Write dict ``rows`` to ``path`` (folder made), columns ``fields`` (default: the
    first row's keys; other keys left out); returns ``path``."""
    os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
    with open(path, 'w', newline='') as f:
        writer = csv.DictWriter(f, fields or list(rows[0]), extrasaction='ignore')
        writer.writeheader()
        writer.writerows(rows)
    return path
