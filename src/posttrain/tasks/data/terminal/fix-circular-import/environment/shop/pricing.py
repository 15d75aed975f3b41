from shop.models import Order


def price_of(order: Order):
    if not isinstance(order, Order):
        raise TypeError("price_of needs an Order")
    return order.product.price * order.quantity
