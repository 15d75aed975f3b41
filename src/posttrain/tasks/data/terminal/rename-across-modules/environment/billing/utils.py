"""Money helpers."""
from decimal import ROUND_HALF_UP, Decimal


def calc_total(items, tax_rate=Decimal("0")):
    """Sum of quantity x unit price over (quantity, unit_price) pairs, plus tax, rounded to cents."""
    subtotal = sum(Decimal(q) * Decimal(p) for q, p in items)
    return (subtotal * (1 + Decimal(tax_rate))).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
