"""python3 -m billing.cli: the revenue of the sample orders."""
from billing.invoice import invoice_lines
from billing.report import daily_revenue
from billing.utils import calc_total as total_of

ORDERS = [
    {"id": 1, "items": [(2, "9.99"), (1, "0.50")], "tax": "0.2"},
    {"id": 2, "items": [(3, "1.25")]},
]

if __name__ == "__main__":
    for o in ORDERS:
        print(*invoice_lines(o), sep="\n")
    print("Revenue:", daily_revenue(ORDERS))
    print("Check:", total_of([(1, "1.005")]))
