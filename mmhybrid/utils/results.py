"""Result files of the benchmark and study scripts under ``tools/``."""
import csv
import os


def write_csv(rows, path, fields=None):
    """Write dict ``rows`` to the CSV file ``path``, making its folder.

    ``fields`` are the columns (default: the keys of the first row); keys of a
    row outside them are left out. Returns ``path``.
    """
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    with open(path, 'w', newline='') as f:
        writer = csv.DictWriter(f, fields or list(rows[0]), extrasaction='ignore')
        writer.writeheader()
        writer.writerows(rows)
    return path
