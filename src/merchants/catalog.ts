// The shops the service serves itself at /merchant/<slug> (docs/security.md, decoys and tasks). Decoy
// purchase tasks send the bot here, so a decoy checkout has a real page to visit and a real form
// to submit. Nothing on these pages or in their URLs says what they are for.

export interface Product {
  slug: string;
  name: string;
  priceCents: number;
}

export interface Shop {
  slug: string;
  name: string;
  tagline: string;
  /** First is the shop's own category; the rest are categories of real traffic it can stand in for. */
  categories: readonly string[];
  products: readonly Product[];
}

const p = (slug: string, name: string, priceCents: number): Product => ({ slug, name, priceCents });

export const SHOPS: readonly Shop[] = [
  {
    slug: 'northwind-books',
    name: 'Northwind Books',
    tagline: 'Independent bookshop, shipping since 2009',
    categories: ['books', 'education', 'retail', 'media'],
    products: [
      p('pocket-atlas', 'Pocket World Atlas', 1299),
      p('field-notes', 'Field Notes Journal (3-pack)', 999),
      p('systems-thinking', 'Thinking in Systems (paperback)', 1850),
      p('bread-baking', 'The Everyday Bread Book', 2495),
      p('sketch-pencils', 'Graphite Sketch Pencils', 649),
      p('classic-box', 'Classic Novels Box Set', 5400),
      p('bookmark', 'Brass Bookmark', 399),
    ],
  },
  {
    slug: 'pixel-parts',
    name: 'Pixel Parts',
    tagline: 'Cables, adapters and small electronics',
    categories: ['electronics', 'hardware', 'retail', 'computers'],
    products: [
      p('usb-c-cable', 'USB-C Cable 2 m', 1199),
      p('hdmi-adapter', 'USB-C to HDMI Adapter', 2299),
      p('power-bank', 'Power Bank 10000 mAh', 3499),
      p('sd-card', 'microSD Card 128 GB', 1895),
      p('wireless-mouse', 'Wireless Mouse', 2650),
      p('cable-ties', 'Reusable Cable Ties (20)', 499),
      p('usb-hub', '7-Port USB Hub', 4490),
      p('keyboard', 'Compact Mechanical Keyboard', 8900),
    ],
  },
  {
    slug: 'greenleaf-grocer',
    name: 'Greenleaf Grocer',
    tagline: 'Fresh groceries delivered the same day',
    categories: ['groceries', 'food', 'household', 'retail'],
    products: [
      p('coffee-beans', 'Single-Origin Coffee Beans 500 g', 1450),
      p('olive-oil', 'Extra Virgin Olive Oil 1 l', 1190),
      p('tea-sampler', 'Loose Leaf Tea Sampler', 1675),
      p('pasta', 'Bronze-Cut Pasta (4 packs)', 899),
      p('snack-box', 'Healthy Snack Box', 2999),
      p('honey', 'Wildflower Honey', 749),
    ],
  },
  {
    slug: 'cloudbyte-hosting',
    name: 'CloudByte Hosting',
    tagline: 'Virtual servers and domains for small teams',
    categories: ['hosting', 'software', 'cloud', 'subscriptions', 'saas'],
    products: [
      p('vps-small', 'VPS Small (1 month)', 500),
      p('vps-medium', 'VPS Medium (1 month)', 1200),
      p('domain', 'Domain Registration (1 year)', 1399),
      p('backup', 'Offsite Backup 100 GB (1 month)', 350),
      p('ssl', 'Extended Validation Certificate', 4900),
      p('vps-large', 'VPS Large (1 month)', 2400),
    ],
  },
  {
    slug: 'brightdesk-office',
    name: 'BrightDesk Office Supply',
    tagline: 'Everything for the home office',
    categories: ['office', 'supplies', 'stationery', 'retail'],
    products: [
      p('printer-paper', 'Printer Paper A4 (500 sheets)', 799),
      p('gel-pens', 'Gel Pens (12)', 1049),
      p('desk-lamp', 'LED Desk Lamp', 3999),
      p('monitor-stand', 'Bamboo Monitor Stand', 4595),
      p('sticky-notes', 'Sticky Notes (10 pads)', 659),
      p('toner', 'Toner Cartridge, Black', 6299),
      p('stapler', 'Heavy-Duty Stapler', 1899),
    ],
  },
  {
    slug: 'tunewave-music',
    name: 'Tunewave',
    tagline: 'Music downloads and audio gear',
    categories: ['music', 'media', 'entertainment', 'digital'],
    products: [
      p('album', 'Album Download (lossless)', 999),
      p('single', 'Single Track', 129),
      p('earbuds', 'Wired Earbuds', 1999),
      p('gift-card', 'Gift Card $25', 2500),
      p('vinyl', 'Vinyl Record', 2899),
      p('headphones', 'Over-Ear Headphones', 7900),
    ],
  },
  {
    slug: 'questforge-games',
    name: 'QuestForge Games',
    tagline: 'Board games, card games and game downloads',
    categories: ['games', 'entertainment', 'toys', 'digital'],
    products: [
      p('card-game', 'Strategy Card Game', 1999),
      p('dice-set', 'Polyhedral Dice Set', 899),
      p('indie-game', 'Indie Game Download', 1499),
      p('board-game', 'Family Board Game', 3995),
      p('expansion', 'Expansion Pack', 2450),
      p('puzzle', '1000-Piece Puzzle', 1795),
    ],
  },
  {
    slug: 'threadline-apparel',
    name: 'Threadline Apparel',
    tagline: 'Everyday clothing in organic cotton',
    categories: ['clothing', 'apparel', 'fashion', 'retail'],
    products: [
      p('tshirt', 'Organic Cotton T-Shirt', 2400),
      p('socks', 'Merino Socks (3 pairs)', 1800),
      p('beanie', 'Knit Beanie', 1500),
      p('hoodie', 'Heavyweight Hoodie', 5900),
      p('cap', 'Canvas Cap', 2200),
      p('tote', 'Canvas Tote Bag', 1250),
    ],
  },
  {
    slug: 'hearth-and-home',
    name: 'Hearth & Home',
    tagline: 'Kitchen and home essentials',
    categories: ['home', 'household', 'kitchen', 'retail'],
    products: [
      p('candle', 'Soy Candle', 1650),
      p('towels', 'Cotton Kitchen Towels (4)', 1399),
      p('french-press', 'French Press 1 l', 3295),
      p('storage-jars', 'Glass Storage Jars (3)', 2149),
      p('knife', "Chef's Knife 20 cm", 5900),
      p('sponges', 'Compostable Sponges (6)', 599),
    ],
  },
  {
    slug: 'petpal-supplies',
    name: 'PetPal Supplies',
    tagline: 'Food, toys and care for cats and dogs',
    categories: ['pets', 'pet supplies', 'retail'],
    products: [
      p('cat-food', 'Grain-Free Cat Food 2 kg', 2299),
      p('dog-treats', 'Dog Training Treats', 899),
      p('chew-toy', 'Durable Chew Toy', 1199),
      p('litter', 'Clumping Litter 10 l', 1549),
      p('leash', 'Reflective Leash', 1899),
      p('bed', 'Washable Pet Bed', 4499),
    ],
  },
  {
    slug: 'vitalis-pharmacy',
    name: 'Vitalis Pharmacy',
    tagline: 'Health and personal care',
    categories: ['health', 'personal care', 'pharmacy', 'beauty'],
    products: [
      p('vitamin-d', 'Vitamin D3 (90 tablets)', 1099),
      p('sunscreen', 'Sunscreen SPF 50', 1549),
      p('first-aid', 'First Aid Kit', 2495),
      p('toothbrush', 'Electric Toothbrush Heads (4)', 1999),
      p('hand-cream', 'Hand Cream', 799),
      p('thermometer', 'Digital Thermometer', 1349),
    ],
  },
  {
    slug: 'appnest-software',
    name: 'AppNest',
    tagline: 'Software licences and subscriptions',
    categories: ['software', 'subscriptions', 'saas', 'digital', 'productivity'],
    products: [
      p('notes-pro', 'Notes Pro (1 year)', 2999),
      p('vpn', 'VPN (1 month)', 899),
      p('password-manager', 'Password Manager (1 year)', 3600),
      p('photo-editor', 'Photo Editor Licence', 4999),
      p('font-pack', 'Font Pack', 1900),
      p('storage', 'Cloud Storage 200 GB (1 month)', 299),
    ],
  },
];

export function findShop(slug: string): Shop | undefined {
  return SHOPS.find((s) => s.slug === slug);
}

export function findProduct(shop: Shop, slug: string): Product | undefined {
  return shop.products.find((x) => x.slug === slug);
}

/** Shops that can stand in for a category of real traffic (case-insensitive). */
export function shopsForCategory(category: string): Shop[] {
  const c = category.trim().toLowerCase();
  return SHOPS.filter((s) => s.categories.includes(c));
}

/**
 * The public address of a product page: the base the bot is sent to, then /merchant/<shop>/<product>.
 * A `{shop}` in the base (DECOY_SHOP_BASE_URL=https://{shop}.shops.example) gives every shop a host
 * of its own, so decoy tasks do not all point at one domain (docs/security.md).
 */
export function productUrl(base: string, shop: Shop, product: Product): string {
  return `${base.replace(/\/+$/, '').replaceAll('{shop}', shop.slug)}/merchant/${shop.slug}/${product.slug}`;
}
