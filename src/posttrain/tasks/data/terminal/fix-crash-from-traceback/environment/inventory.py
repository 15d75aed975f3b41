"""python3 inventory.py ORDERS.json: revenue per item, most first, as `item: amount`."""
import json
import sys
from collections import defaultdict
from decimal import Decimal


def revenue(orders):
    totals = defaultdict(Decimal)
    for order in orders:
        for line in order["lines"]:
            price = Decimal(line["price"]) * line["qty"]
            totals[line["item"]] += price * (1 - Decimal(order["discount"]))
    return totals


if __name__ == "__main__":
    totals = revenue(json.load(open(sys.argv[1])))
    for item, amount in sorted(totals.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"{item}: {amount.quantize(Decimal('0.01'))}")
