#!/bin/bash
# The oracle: run in /app.
set -euo pipefail
cat > shop/pricing.py <<'EOF'
def price_of(order):
    from shop.models import Order  # imported here: shop.models imports this module

    if not isinstance(order, Order):
        raise TypeError("price_of needs an Order")
    return order.product.price * order.quantity
EOF
