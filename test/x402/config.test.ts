import { describe, expect, it } from 'vitest';
import { ConfigError, parseConfig } from '../../src/config.ts';

// X402_* configuration: known networks bring their USDC contract and a public RPC endpoint; a
// custom chain must name both; every mistake names its variable.

describe('x402 configuration', () => {
  it('is off by default', () => {
    expect(parseConfig({}).x402).toBeUndefined();
  });

  it('knows Base and Base Sepolia', () => {
    expect(parseConfig({ X402_NETWORK: 'base' }).x402).toMatchObject({
      network: 'eip155:8453',
      chainId: 8453,
      usdcAddress: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
      rpcUrl: 'https://mainnet.base.org',
      maxValiditySeconds: 120,
    });
    expect(
      parseConfig({ X402_NETWORK: 'base-sepolia', X402_RPC_URL: 'https://rpc.example.com' }).x402,
    ).toMatchObject({
      network: 'eip155:84532',
      usdcAddress: '0x036CbD53842c5426634e7929541eC2318f3dCF7e',
      rpcUrl: 'https://rpc.example.com',
    });
  });

  it('a custom chain needs its RPC endpoint and USDC contract', () => {
    const cfg = parseConfig({
      X402_NETWORK: 'eip155:31337',
      X402_RPC_URL: 'http://127.0.0.1:8545',
      X402_USDC_ADDRESS: '0x5FbDB2315678afecb367f032d93F642f64180aa3',
    }).x402;
    expect(cfg).toMatchObject({ network: 'eip155:31337', chainId: 31337 });
    expect(() =>
      parseConfig({
        X402_NETWORK: 'eip155:31337',
        X402_USDC_ADDRESS: '0x5FbDB2315678afecb367f032d93F642f64180aa3',
      }),
    ).toThrow(/X402_RPC_URL/);
    expect(() =>
      parseConfig({ X402_NETWORK: 'eip155:31337', X402_RPC_URL: 'http://127.0.0.1:8545' }),
    ).toThrow(/X402_USDC_ADDRESS/);
  });

  it.each([
    [{ X402_NETWORK: 'solana' }, 'X402_NETWORK'],
    [{ X402_NETWORK: 'eip155:0' }, 'X402_NETWORK'],
    [{ X402_NETWORK: 'base', X402_RPC_URL: 'ftp://x' }, 'X402_RPC_URL'],
    [{ X402_NETWORK: 'base', X402_USDC_ADDRESS: '0x123' }, 'X402_USDC_ADDRESS'],
    [{ X402_NETWORK: 'base', X402_MAX_VALIDITY_SECONDS: '5' }, 'X402_MAX_VALIDITY_SECONDS'],
  ])('%j is refused naming %s', (env, variable) => {
    try {
      parseConfig(env);
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(ConfigError);
      expect((error as ConfigError).variable).toBe(variable);
    }
  });
});
