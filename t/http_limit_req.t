#!/usr/bin/perl

# The limit_req module: a request over the rate is refused with 503 (or
# limit_req_status) and logged as nginx logs it; burst with nodelay; delay=
# (the request waits, logged one level lower); dry run; $limit_req_status;
# an empty key is not limited; two limits on one location. The zone is
# shared by the workers (worker_processes 2, reuseport: requests on new
# connections reach both, and only one passes) and kept across a reload
# when its name and size stay; a new size makes a new zone, a new key is
# nginx's [emerg] and the reload is refused. Broken directives are refused
# by -t with nginx's message and FILE:LINE.

use warnings;
use strict;

use Test::More;
use Time::HiRes qw/time/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http limit_req/)->plan(29);
my $d = $t->testdir();

sub conf {
	my ($size, $key) = @_;
	return <<"EOF";

%%TEST_GLOBALS%%

worker_processes 2;

events {
}

http {
    log_format st "\$uri \$pid \$limit_req_status";
    access_log %%TESTDIR%%/access.log st;
    root %%TESTDIR%%;

    limit_req_zone \$binary_remote_addr zone=one:$size rate=1r/m;
    limit_req_zone $key zone=shared:1m rate=1r/m;
    limit_req_zone \$uri zone=burst:1m rate=1r/m;
    limit_req_zone \$uri zone=delay:1m rate=2r/s;
    limit_req_zone \$uri zone=dry:1m rate=1r/m;
    limit_req_zone \$arg_k zone=empty:1m rate=1r/m;
    limit_req_zone \$uri zone=a:1m rate=1r/m;
    limit_req_zone \$uri zone=b:1m rate=1r/m;

    server {
        listen 127.0.0.1:%%PORT_8080%% reuseport;

        location /one { limit_req zone=one; }
        location /shared { limit_req zone=shared; }
        location /status {
            limit_req zone=shared;
            limit_req_status 429;
            limit_req_log_level info;
        }
        location /burst { limit_req zone=burst burst=2 nodelay; }
        location /delay { limit_req zone=delay burst=5 delay=1; }
        location /dry {
            limit_req zone=dry;
            limit_req_dry_run on;
        }
        location /empty { limit_req zone=empty; }
        location /two {
            limit_req zone=a burst=1 nodelay;
            limit_req zone=b burst=3 nodelay;
        }
        # return runs before the limits (nginx's rewrite phase).
        location /ret { limit_req zone=one; return 200 "ret"; }
    }
}

EOF
}

for my $f (qw/one shared status burst delay dry empty two/) {
	$t->write_file($f, "$f\n");
}
$t->write_file_expand('sluice.conf', conf('1m', '$server_port'));
$t->run();

sub code {
	my ($uri) = @_;
	my $r = http_get($uri) // '';
	return $r =~ m{^HTTP/1\.[01] (\d+)} ? $1 : 'none';
}

# Over the rate: 503, and nginx's line at error level.
is(code('/one'), 200, 'first request passes');
is(code('/one'), 503, 'second request within the minute is refused');
ok($t->waitforlog(qr/\[error\] \d+#\d+: \*\d+ limiting requests, excess: [01]\.\d{3} by zone "one", client: 127\.0\.0\.1, server: , request: "GET \/one HTTP\/1\.0", host: "localhost"/),
	'rejection logged as nginx');
is(code('/ret'), 200, 'return is not limited');

# burst=2 nodelay: three at once, then refused.
is(join(' ', map { code('/burst') } 1 .. 4), '200 200 200 503', 'burst nodelay');

# delay=1: the second goes at once, the third waits about 500 ms.
code('/delay');
my $t0 = time();
code('/delay');
my $t1 = time();
code('/delay');
my $t2 = time();
cmp_ok($t1 - $t0, "<", 0.3, 'within delay= not delayed');
cmp_ok($t2 - $t1, ">", 0.35, 'beyond delay= delayed');
# The third request's excess is 2 less what drained since the first, at
# 2r/s: 2.000 when all three came within the same millisecond.
ok($t->waitforlog(qr/\[warn\] .*delaying request, excess: (?:1\.\d{3}|2\.000), by zone "delay"/),
	'delay logged one level lower');

# Dry run: passes, logged, $limit_req_status says so.
is(code('/dry'), 200, 'dry run first');
is(code('/dry'), 200, 'dry run second passes');
ok($t->waitforlog(qr/\[error\] .*limiting requests, dry run, excess: [01]\.\d{3} by zone "dry"/),
	'dry run logged');

# An empty key is not accounted.
is(join(' ', map { code('/empty') } 1 .. 3), '200 200 200', 'empty key not limited');
is(join(' ', map { code('/empty?k=x') } 1 .. 2), '200 503', 'non-empty key limited');

# Two limits: the stricter one refuses, naming its zone.
is(join(' ', map { code('/two') } 1 .. 3), '200 200 503', 'two limits');
ok($t->waitforlog(qr/excess: 2\.\d{3} by zone "a"/), 'refused by the first zone');

# Shared by the workers: new connections reach both, one request passes.
my @codes = map { code('/shared') } 1 .. 24;
is(scalar(grep { $_ == 200 } @codes), 1, 'one of 24 passes across workers');
is(scalar(grep { $_ == 503 } @codes), 23, 'the others are refused');
ok($t->waitforfile("$d/access.log"), 'access log');
my %pids;
for my $l (split /\n/, $t->read_file('access.log')) {
	$pids{$1} = 1 if $l =~ m{^/shared (\d+) };
}
is(scalar(keys %pids), 2, 'both workers served /shared');
like($t->read_file('access.log'), qr{^/shared \d+ PASSED$}m, '$limit_req_status PASSED');
like($t->read_file('access.log'), qr{^/shared \d+ REJECTED$}m, '$limit_req_status REJECTED');
like($t->read_file('access.log'), qr{^/delay \d+ DELAYED$}m, '$limit_req_status DELAYED');
like($t->read_file('access.log'), qr{^/dry \d+ REJECTED_DRY_RUN$}m, '$limit_req_status REJECTED_DRY_RUN');

# limit_req_status and limit_req_log_level.
is(code('/status'), 429, 'limit_req_status');
ok($t->waitforlog(qr/\[info\] .*limiting requests, excess: [\d.]+ by zone "shared".*\/status/),
	'limit_req_log_level info');

# Across a reload: the same zone keeps its state.
ok($t->reload(), 'reloaded');
is(code('/one'), 503, 'state kept across reload');

# A new size: a new zone (as nginx), the key starts afresh.
$t->write_file_expand('sluice.conf', conf('2m', '$server_port'));
$t->reload();
# Until the old generation stops accepting, a request may still meet its
# zone (503); the new generation's zone passes the first request.
ok(poll_until(sub { code('/one') eq '200' }, 5), 'new size, new zone');

# A new key for a kept zone: refused as nginx refuses it; old config serves.
$t->expect_errors(qr/limit_req "shared" uses the "\$uri" key while previously it used the "\$server_port" key/);
$t->write_file_expand('sluice.conf', conf('2m', '$uri'));
$t->signal('HUP');
ok($t->waitforlog(qr/\[emerg\] .*limit_req "shared" uses the "\$uri" key while previously it used the "\$server_port" key/),
	'changed key refused');
