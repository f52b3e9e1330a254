import { type ChildProcess, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import {
  type Abi,
  type Address,
  type Chain,
  createPublicClient,
  createWalletClient,
  defineChain,
  getAddress,
  type Hex,
  http,
  publicActions,
} from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { freePort } from '../support/process.ts';

// A local EVM chain for the x402 tests: anvil (Foundry's node), the binary shipped inside the npm
// package of this platform (@foundry-rs/anvil-linux-amd64 and siblings, optional dependencies of
// @foundry-rs/anvil), started on a free loopback port by the test itself, and a
// USDC-like token with EIP-3009 transferWithAuthorization compiled here from Solidity with solc-js
// on top of OpenZeppelin's ERC20 and EIP712. No network is used.

const require = createRequire(import.meta.url);

/** Anvil's well-known development keys (its default mnemonic): test money on a throwaway chain. */
export const ANVIL_KEYS = [
  '0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80',
  '0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d',
  '0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a',
] as const satisfies readonly Hex[];

export const CHAIN_ID = 31337;

/** The platform packages of @foundry-rs/anvil (its optional dependencies), by Node's platform-arch. */
const ANVIL_PACKAGES: Record<string, string> = {
  'linux-x64': '@foundry-rs/anvil-linux-amd64',
  'linux-arm64': '@foundry-rs/anvil-linux-arm64',
  'darwin-x64': '@foundry-rs/anvil-darwin-amd64',
  'darwin-arm64': '@foundry-rs/anvil-darwin-arm64',
};

/** The path of the anvil binary, or why there is none on this platform. */
export function anvilBinary(): { path: string } | { reason: string } {
  const platform = `${process.platform}-${process.arch}`;
  const pkg = ANVIL_PACKAGES[platform];
  if (!pkg) return { reason: `@foundry-rs/anvil ships no binary for ${platform}` };
  try {
    const path = join(dirname(require.resolve(`${pkg}/package.json`)), 'bin', 'anvil');
    return existsSync(path) ? { path } : { reason: `${path} is missing` };
  } catch {
    return { reason: `${pkg} is not installed (npm ci installs it on ${platform})` };
  }
}

export interface LocalChain {
  rpcUrl: string;
  chain: Chain;
  /** Anvil's RPC for tests: mine, move time. */
  rpc(method: string, params?: unknown[]): Promise<unknown>;
  stop(): Promise<void>;
}

export async function startAnvil(binary: string, chainId: number = CHAIN_ID): Promise<LocalChain> {
  const port = await freePort();
  const proc: ChildProcess = spawn(
    binary,
    [
      '--host',
      '127.0.0.1',
      '--port',
      String(port),
      '--chain-id',
      String(chainId),
      '--accounts',
      '3',
      '--silent',
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let stderr = '';
  proc.stderr?.on('data', (d) => {
    stderr += String(d);
  });
  const rpcUrl = `http://127.0.0.1:${port}`;
  const rpc = async (method: string, params: unknown[] = []) => {
    const res = await fetch(rpcUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
    });
    const body = (await res.json()) as { result?: unknown; error?: { message: string } };
    if (body.error) throw new Error(`${method}: ${body.error.message}`);
    return body.result;
  };
  const deadline = Date.now() + 20_000;
  for (;;) {
    try {
      await rpc('eth_chainId');
      break;
    } catch (error) {
      if (proc.exitCode !== null || Date.now() > deadline) {
        proc.kill('SIGKILL');
        throw new Error(`anvil did not start: ${stderr || String(error)}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  const chain = defineChain({
    id: chainId,
    name: 'anvil',
    nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
    rpcUrls: { default: { http: [rpcUrl] } },
  });
  return {
    rpcUrl,
    chain,
    rpc,
    async stop() {
      if (proc.exitCode !== null) return;
      const exited = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGTERM');
      await Promise.race([exited, new Promise((r) => setTimeout(r, 3000))]);
      if (proc.exitCode === null) proc.kill('SIGKILL');
    },
  };
}

const TOKEN_SOURCE = `// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ERC20} from "@openzeppelin/contracts/token/ERC20/ERC20.sol";
import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";
import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";

/// A USDC-like test token: 6 decimals and EIP-3009 transferWithAuthorization, as USDC has.
contract TestUSDC is ERC20, EIP712 {
    bytes32 public constant TRANSFER_WITH_AUTHORIZATION_TYPEHASH = keccak256(
        "TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)"
    );
    address public immutable minter;
    mapping(address => mapping(bytes32 => bool)) private _authorizationStates;

    event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce);

    constructor() ERC20("USD Coin", "USDC") EIP712("USD Coin", "2") {
        minter = msg.sender;
    }

    function decimals() public pure override returns (uint8) {
        return 6;
    }

    function version() external pure returns (string memory) {
        return "2";
    }

    function mint(address to, uint256 value) external {
        require(msg.sender == minter, "only the minter");
        _mint(to, value);
    }

    function authorizationState(address authorizer, bytes32 nonce) external view returns (bool) {
        return _authorizationStates[authorizer][nonce];
    }

    function transferWithAuthorization(
        address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce,
        uint8 v, bytes32 r, bytes32 s
    ) external {
        _useAuthorization(from, to, value, validAfter, validBefore, nonce, ECDSA.recover(
            _digest(from, to, value, validAfter, validBefore, nonce), v, r, s));
    }

    function transferWithAuthorization(
        address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce,
        bytes memory signature
    ) external {
        _useAuthorization(from, to, value, validAfter, validBefore, nonce, ECDSA.recover(
            _digest(from, to, value, validAfter, validBefore, nonce), signature));
    }

    function _digest(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce)
        private view returns (bytes32)
    {
        return _hashTypedDataV4(keccak256(abi.encode(
            TRANSFER_WITH_AUTHORIZATION_TYPEHASH, from, to, value, validAfter, validBefore, nonce)));
    }

    function _useAuthorization(
        address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, address signer
    ) private {
        require(block.timestamp > validAfter, "authorization is not yet valid");
        require(block.timestamp < validBefore, "authorization is expired");
        require(!_authorizationStates[from][nonce], "authorization is used");
        require(signer == from, "invalid signature");
        _authorizationStates[from][nonce] = true;
        emit AuthorizationUsed(from, nonce);
        _transfer(from, to, value);
    }
}
`;

export interface CompiledToken {
  abi: Abi;
  bytecode: Hex;
}

/**
 * Compiles TestUSDC with solc-js, reading OpenZeppelin from node_modules. The result is kept in the
 * system's temporary directory under a hash of everything that goes in (about 10 s saved per file).
 */
export async function compileToken(): Promise<CompiledToken> {
  const versions = ['solc', '@openzeppelin/contracts']
    .map(
      (p) =>
        (JSON.parse(readFileSync(require.resolve(`${p}/package.json`), 'utf8')) as { version: string })
          .version,
    )
    .join(',');
  const cache = join(
    tmpdir(),
    `botpay-testusdc-${createHash('sha256')
      .update(TOKEN_SOURCE + versions)
      .digest('hex')
      .slice(0, 16)}.json`,
  );
  if (existsSync(cache)) {
    try {
      return JSON.parse(readFileSync(cache, 'utf8')) as CompiledToken;
    } catch {
      // A half-written cache from a concurrent run: compile again.
    }
  }
  const compiled = await compileFresh();
  writeFileSync(`${cache}.${process.pid}`, JSON.stringify(compiled));
  renameSync(`${cache}.${process.pid}`, cache);
  return compiled;
}

async function compileFresh(): Promise<CompiledToken> {
  const solc = (await import('solc')).default as { compile(input: string, opts?: unknown): string };
  const input = {
    language: 'Solidity',
    sources: { 'TestUSDC.sol': { content: TOKEN_SOURCE } },
    settings: {
      evmVersion: 'cancun',
      viaIR: true,
      optimizer: { enabled: true, runs: 200 },
      outputSelection: { '*': { '*': ['abi', 'evm.bytecode.object'] } },
    },
  };
  const findImports = (path: string) => {
    try {
      return { contents: readFileSync(require.resolve(path), 'utf8') };
    } catch {
      return { error: `not found: ${path}` };
    }
  };
  const output = JSON.parse(solc.compile(JSON.stringify(input), { import: findImports })) as {
    errors?: Array<{ severity: string; formattedMessage: string }>;
    contracts: Record<string, Record<string, { abi: Abi; evm: { bytecode: { object: string } } }>>;
  };
  const errors = (output.errors ?? []).filter((e) => e.severity === 'error');
  if (errors.length > 0) throw new Error(errors.map((e) => e.formattedMessage).join('\n'));
  const c = output.contracts['TestUSDC.sol']!.TestUSDC!;
  return { abi: c.abi, bytecode: `0x${c.evm.bytecode.object}` };
}

export interface DeployedToken {
  address: Address;
  mint(to: string, micro: bigint): Promise<void>;
  balanceOf(who: string): Promise<bigint>;
}

/** Deploys the token from anvil's first account (the minter). */
export async function deployToken(chain: LocalChain, compiled: CompiledToken): Promise<DeployedToken> {
  const account = privateKeyToAccount(ANVIL_KEYS[0]);
  const wallet = createWalletClient({ account, chain: chain.chain, transport: http(chain.rpcUrl) }).extend(
    publicActions,
  );
  const hash = await wallet.deployContract({
    abi: compiled.abi,
    bytecode: compiled.bytecode,
    chain: chain.chain,
    account,
  });
  const receipt = await wallet.waitForTransactionReceipt({ hash });
  const address = getAddress(receipt.contractAddress!);
  const reader = createPublicClient({ chain: chain.chain, transport: http(chain.rpcUrl) });
  return {
    address,
    async mint(to, micro) {
      const tx = await wallet.writeContract({
        address,
        abi: compiled.abi,
        functionName: 'mint',
        args: [to as Address, micro],
        chain: chain.chain,
        account,
      });
      await wallet.waitForTransactionReceipt({ hash: tx });
    },
    async balanceOf(who) {
      return (await reader.readContract({
        address,
        abi: compiled.abi,
        functionName: 'balanceOf',
        args: [who as Address],
      })) as bigint;
    },
  };
}
