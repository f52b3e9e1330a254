import type { getAddress, isHex } from 'viem';
import type { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';

// The partner wallet rail's Ethereum libraries (viem, and the x402 client libraries in sign.ts)
// are ~500 modules: loading them costs a start ~200 ms and ~30 MB, and most installations never
// turn the rail on. They are loaded on first use instead: the address and key checks through
// loadEvm(), signing (sign.ts) and chain reads (chain.ts) by dynamic import where they are called.
// test/foundation/lazyLoading.test.ts checks that a started service has loaded none of them.

export interface Evm {
  getAddress: typeof getAddress;
  isHex: typeof isHex;
  generatePrivateKey: typeof generatePrivateKey;
  privateKeyToAccount: typeof privateKeyToAccount;
  /** x402 v1 network names (`base`, `base-sepolia`, …) → EVM chain id, from the reference library. */
  v1ChainIds: Readonly<Record<string, number>>;
}

let loading: Promise<Evm> | undefined;

/** viem's address and key functions, loaded once, on first use. */
export function loadEvm(): Promise<Evm> {
  loading ??= (async () => {
    const [viem, accounts, v1] = await Promise.all([
      import('viem'),
      import('viem/accounts'),
      import('@x402/evm/v1'),
    ]);
    return {
      getAddress: viem.getAddress,
      isHex: viem.isHex,
      generatePrivateKey: accounts.generatePrivateKey,
      privateKeyToAccount: accounts.privateKeyToAccount,
      v1ChainIds: v1.EVM_NETWORK_CHAIN_ID_MAP,
    };
  })();
  return loading;
}
