from billing.utils import calc_total


def invoice_lines(order):
    total = calc_total(order["items"], order.get("tax", "0"))
    return [f"Invoice {order['id']}", f"Total: {total}"]
