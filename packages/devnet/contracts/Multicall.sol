// SPDX-License-Identifier: MIT
pragma solidity 0.8.26;

/// Multicall3's aggregate3 (github.com/mds1/multicall), with its signature and its revert message.
/// The devnet puts this code at Multicall3's address (0xcA11bde05977b3631167028862bE2a173976CA11,
/// the same on Arbitrum One), so reads batched through it work the same on both.
contract DevMulticall {
    struct Call3 {
        address target;
        bool allowFailure;
        bytes callData;
    }

    struct Result {
        bool success;
        bytes returnData;
    }

    function aggregate3(Call3[] calldata calls) external payable returns (Result[] memory returnData) {
        returnData = new Result[](calls.length);
        for (uint256 i = 0; i < calls.length; i++) {
            (bool success, bytes memory data) = calls[i].target.call(calls[i].callData);
            require(success || calls[i].allowFailure, "Multicall3: call failed");
            returnData[i] = Result(success, data);
        }
    }
}
