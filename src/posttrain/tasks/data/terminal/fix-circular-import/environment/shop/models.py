from decimal import Decimal

from shop.pricing import price_of


class Product:
    def __init__(self, name, price):
        self.name, self.price = name, Decimal(price)


class Order:
    def __init__(self, product, quantity):
        self.product, self.quantity = product, quantity

    def total(self):
        return price_of(self)
