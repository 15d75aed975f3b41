from shop.models import Order, Product

widget, gadget = Product("widget", "9.99"), Product("gadget", "24.50")
for i, order in enumerate([Order(widget, 2), Order(gadget, 1)], 1):
    print(f"order {i}: {order.quantity} x {order.product.name} = {order.total()}")
