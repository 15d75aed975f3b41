from billing import utils


def daily_revenue(orders):
    return sum(utils.calc_total(o["items"], o.get("tax", "0")) for o in orders)
